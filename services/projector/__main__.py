from services.projector.app import main

main()
