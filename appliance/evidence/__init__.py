"""Published findings in evidence/ and the comparison of a verified bundle with them.

May import: every stage before it (core .. attest).
"""
