"""The machinery that runs experiments: where results are stored and how they are computed.

* :mod:`~sensbook.runtime.store`: result keys (a hash of the configuration and of the code
  that computes it), the on-disk store with checksums and claims;
* :mod:`~sensbook.runtime.sweep`: sweeps of configurations, a process pool, one pool over
  several sweeps;
* :mod:`~sensbook.runtime.executors`: local processes and Slurm job arrays (submitit);
* :mod:`~sensbook.runtime.published`: results the published book computed (Colab).

It imports nothing of sensbook but :mod:`sensbook.settings`: the instruments never import it,
and the experiments (:mod:`sensbook.experiments`) use it.
"""
from .store import Store, key, results_dir, version
from .sweep import Sweep, run_pool, run_sweep

__all__ = ["Store", "Sweep", "key", "results_dir", "run_pool", "run_sweep", "version"]
