"""Content a bundle carries besides providers: cert-manager, the operator, templates."""
