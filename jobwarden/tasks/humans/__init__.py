"""What people do, applied: interventions, contract moves, token principals, notifications sent.

Every change here goes through the one planner (``models/effects.py``), with its author.
"""
