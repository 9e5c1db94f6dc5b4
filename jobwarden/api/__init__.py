"""The HTTP API (issue 10): create_app in .app, tokens in .auth, problems in .problems.

May import: ``jobwarden.models``, ``jobwarden.tasks``, ``jobwarden.config`` and
``jobwarden.observability``; never another door (the console installs itself on this
app: ``jobwarden.console.app``).
"""
