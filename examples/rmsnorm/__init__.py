"""RMSNorm, a family in one file (family.py): the example docs/families.md walks through."""
