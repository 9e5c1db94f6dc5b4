"""The door matrix's cells, one module per promise (tests/integration/test_door_matrix.py)."""
