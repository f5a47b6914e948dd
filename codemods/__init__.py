"""``air-migrate``: rewrite ``serverless_gpu`` and ``TorchDistributor`` code to ``@distributed``."""
