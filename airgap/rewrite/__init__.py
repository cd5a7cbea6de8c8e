"""What import and configmaps both make of a verified bundle, before anything is pushed.

The mapping of every bundle image to the target, provider components and contents with
their image references rewritten to it: ``mirror`` (pushing) and ``configmaps`` (the
operator's objects) build on this and never on each other.

Layer 7: may import layers 0-6 (``core`` to ``verify``).
"""
