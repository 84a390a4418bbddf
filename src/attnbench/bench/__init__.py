"""Cost benchmarks (``attnbench bench ...``): one attention call per score function with its roofline bound
(:mod:`~attnbench.bench.attention`), training throughput on the same batches (:mod:`~attnbench.bench.train`),
short-sequence latency (:mod:`~attnbench.bench.short`) and the GPU check (:mod:`~attnbench.bench.gpu_check`)."""
