"""The OCI distribution client: a registry session (``client``), its connection pool
(``pool``), token and basic auth (``auth``), credentials from docker config files
(``credentials``) and TLS trust (``certs``). Credentials go only to their own origin.

Layer 3: may import ``core``, ``formats``, ``net`` and ``oci``.
"""
