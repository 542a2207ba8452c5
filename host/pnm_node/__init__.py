"""NelssaHost, the PNM node's software (paper 6.2): control service, KV partitioner, job
dispatcher and output aggregator over N devices, served over an emulated RoCE link; and the
client the GPU node uses to reach it."""
