"""``airgap prune``: remove from the disconnected registry what no kept bundle needs.

Two stages, as oc-mirror v2's delete workflow has them after users lost content to
automatic pruning: ``plan`` (``planner``) lists every tag and manifest under the target
prefix that no kept bundle needs and writes a plan, changing nothing; ``--apply``
(``applier``) deletes exactly that plan's manifests, re-checking each first. Blobs are
never deleted: the registry's own garbage collection frees what no manifest references.

Layer 10: may import layers 0-9 (it reads what ``collect`` and ``importing`` write).
"""
