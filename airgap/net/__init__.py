"""Talking HTTP: the client factory, retries and status-to-error mapping (``httpclient``),
the fast HTTP/1.1 transport for registry traffic (``fasthttp``), pacing of slow servers
(``pacing``, ``pacedcore``), proxies (``proxies``), request bodies read from files
(``filebody``) and the ``--debug`` request log (``httplog``). A change to proxy handling,
TLS, retries or timeouts goes here.

Layer 2: may import ``airgap.core`` and ``airgap.formats``.
"""
