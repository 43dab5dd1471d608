"""The projector service: `python -m services.projector` (or `build` with shared.service.serve).

Settings: GPULEDGER_DB_URL (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/gpuledger), else a
SQLite file under GPULEDGER_DATA_DIR; the schema is brought to alembic head before projecting.
"""

from __future__ import annotations

import asyncio
import logging

from shared.service import ServiceContext, serve
from shared.settings import Settings

from services.projector import runner
from services.projector.db import make_engine, migrate
from services.projector.projector import Projector

NAME = "projector"
log = logging.getLogger("gpuledger.projector")


async def build(ctx: ServiceContext) -> None:
    engine = make_engine(ctx.settings.database_url)
    await asyncio.to_thread(migrate, engine)
    projector = Projector(engine)
    ctx.spawn(runner.run(projector, ctx.log), name="projector")
    ctx.metrics.follow_fold(lambda: projector.position, ctx.log.last_seq)  # committed with the rows

    async def dispose() -> None:
        engine.dispose()

    ctx.on_stop.append(dispose)
    log.info("projecting into %s", engine.url.render_as_string(hide_password=True))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(serve(NAME, Settings(), build))
