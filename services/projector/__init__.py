"""The read models: a projector folds the event log into SQL tables for queries.

models.py (tables), db.py (engines, alembic), rows.py (state -> rows), dirty.py (what an event
touches), store.py (one transaction per batch with the position), projector.py (the fold), app.py
(the service), replay.py (reading the log up to a sequence or a time).
"""
