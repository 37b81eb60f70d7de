"""Engine images: registry-free bases (`base`, `cuda_base`), the build (`build`, on the builders
of `builders`), a compile check on another build base (`compile_check`), the labels (`labels`)
and their check against the lock (`inspection`), the self-test (`selftest`), registries
(`registry`), and signed archives for machines without one (`archive`).

May import: core .. trace.
"""
