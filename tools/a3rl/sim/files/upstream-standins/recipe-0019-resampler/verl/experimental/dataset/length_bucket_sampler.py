# STAND-IN made by a3rl's simulator for the recipe's verl patch 0019 (length-aware resampler): verl.experimental.dataset.length_bucket_sampler
"""Batches of similar expected response length, per epoch."""


class LengthAwareEpochSampler:
    def __init__(self, data_source, data_config):
        self.data_source = data_source
        self.data_config = data_config

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)
