"""``airgap serve``: a verified bundle as a read-only OCI distribution endpoint.

Layer 8: may import layers 0-7.
"""
