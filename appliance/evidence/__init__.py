"""Published findings in evidence/ (`finding`) and what is done with a verified bundle against
them: what the bundle says (`bundle_facts`), the comparison (`compare`, trials flagged not
comparable by `contamination`, a sweep's claims by `sweep_claims`) and a finding drafted from a
bundle (`draft`).

May import: core .. attest.
"""
