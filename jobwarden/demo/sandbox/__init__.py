"""The sandbox provider: an HTTP job API whose behaviour each command chooses (demo and tests).

Started by ``jobwarden sandbox`` (or ``python -m jobwarden.demo.sandbox``); nothing in the
worker, API or CLI paths imports it.
"""
