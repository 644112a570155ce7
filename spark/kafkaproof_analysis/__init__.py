"""The kafkaproof analysis job as a package: spark/analyze.py is its entry file, spark-submit ships it
with ``--py-files`` (`kafkaproof.analysis` zips it).

Modules, each importing only those before it (tests/unit/test_architecture_spark.py checks it):
base (vocabulary, units, locations; no pyspark) → families (the fault families' kinds and evidence, from
kafkaproof's registry: the zip's generated family_registry; no pyspark) → schemas (the ledger's Spark
schemas) → columns (column helpers) → context (manifest reading) → store (files through Hadoop's
FileSystem API) → values → causes → offsets → polls → commits
(commit consistency) → pipeline
(an exactly-once copier's checks) → share (a share group's checks, KIP-932) → latency → exercised → metrics → job (one run's
analysis, the session, `main`). Standalone on purpose: pyspark and the standard library only; `kafkaproof`
only in families' fallback, run from the source tree without the zip.
"""
