"""Content a bundle carries besides providers: cert-manager, the operator,
cluster templates, addon manifests, Helm charts and Kubernetes versions' kubeadm images.

Layer 5: may import layers 0-4 (``core`` to ``bundle``, ``providers``, ``supplychain``).
"""
