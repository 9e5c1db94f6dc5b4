"""The HTTP API (issue 10): create_app in .app, tokens in .auth, problems in .problems."""
