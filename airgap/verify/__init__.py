"""``airgap verify``: a bundle checked on its own, by anyone: the signature, every member's
digest in one pass over the tar (``scan``), every name a manifest gives
(``recordnames``), the OCI layout (``layoutcheck``), content records (``records``),
image signatures, a policy, an inventory, an SBOM and a review page for people.

Layer 6: may import every package of layers 0-5 (``core`` to ``content``, ``installer``).
"""
