"""``airgap collect``: a spec read (``spec``), releases and images fetched, and one
signed bundle written.

Layer 8: may import layers 0-7.
"""
