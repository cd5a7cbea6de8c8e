"""airgap: carry Cluster API providers and their container images across an air gap."""

import sys

__version__ = "0.1.0"

# httpx imports its own command-line client (click, rich, pygments: a large share of a
# no-op re-import's start-up) whenever those happen to be installed, and airgap never runs it.
# A None entry in sys.modules makes that optional import fail at once, as if they were
# missing; httpx then defines a stub `httpx.main`. Left alone if something imported it.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
