"""The ``import``, ``configmaps`` and ``status`` commands: verify a bundle, rewrite its
references (``rewrite``), push (``mirror``), emit the operator's objects
(``configmaps``), and say what a target holds of a bundle. The one package that builds
on both ``mirror`` and ``configmaps``.

Layer 9: may import layers 0-8.
"""
