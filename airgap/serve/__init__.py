"""``airgap serve``: a verified bundle as a read-only OCI distribution endpoint."""
