"""Collecting results: fetching the bytes (paged, verified) and storing them as artifacts.

``collection`` runs the collect step's download; ``store`` writes to the filesystem or S3
(obstore) and reads back for the API's downloads.
"""
