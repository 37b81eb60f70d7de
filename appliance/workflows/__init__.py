"""The only modules that chain stages: run a profile to a sealed bundle, the demo, reproductions.

May import: every stage except cli.
"""
