"""The tools: the ``mxopt`` subcommands that exercise the library and its oracle, kept apart from
both (nothing in the library or the oracle imports them).

* :mod:`~toolkit.tools.check`: the oracle's proofs and every optimizer x backend x dtype
  against the oracle (``mxopt check``);
* :mod:`~toolkit.tools.accuracy`: normalised error per optimizer x backend x dtype, table and
  plot (``mxopt accuracy``);
* :mod:`~toolkit.tools.regress`: golden trajectories, recorded and compared (``mxopt regress``);
* :mod:`~toolkit.tools.bench`: the benchmark suite (``mxopt bench``);
* :mod:`~toolkit.tools.demo`: every optimizer trains softmax regression (``mxopt demo``).

``mxopt launch`` stays in the library (``toolkit.mpi_jobs``): a distributed Trainer imports it on
every rank.
"""
