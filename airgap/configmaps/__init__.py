"""What the Cluster API operator consumes: labelled ConfigMaps, one per provider version,
provider CRs selecting them, and the addons and charts that go with them.

Layer 8: may import layers 0-7; never ``mirror`` (a sibling).
"""
