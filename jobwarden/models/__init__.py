"""The domain: the pure core (decisions, plans, states) in rooms by concept, and its SQL.

Every room but ``persistence`` is pure: it imports no sqlalchemy, httpx, redis or celery
(``tests/unit/test_import_rules.py`` holds that). Top level: the operation snapshot, its
states and transitions, the actions a decision returns, the planner and the steps.
May import: nothing else in ``jobwarden`` (``persistence`` may import the rest of
``jobwarden.models``; the pure rooms never import ``persistence``).
"""
