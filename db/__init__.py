"""The results database: SQLAlchemy 2.x schema (``db.models``) and the store (``db.store``).

Our tables live beside Optuna's in the same SQLite file; only the driver writes them.
"""

from db.store import RunRow, Store, SweepRow

__all__ = ["RunRow", "Store", "SweepRow"]
