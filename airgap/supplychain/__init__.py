"""What upstream attaches to images: cosign signatures, attestations and SBOMs.

``formats`` names them as cosign and the OCI distribution spec do (pure); ``discover``
finds them in a source registry for collect; ``cosign`` verifies cosign signatures
offline with ``cryptography`` alone, ``sigstore`` reads keyless (Fulcio, Rekor)
bundles.

Layer 4: may import ``core``, ``formats``, ``net``, ``oci`` and ``registry``.
"""
