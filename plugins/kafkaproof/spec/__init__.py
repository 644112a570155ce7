"""Pure data and validation: scenarios, faults, cluster configuration, clients, the ledger and manifest contracts.

Nothing here has a side effect beyond reading and writing its own files (scenario YAML,
ledger Parquet, manifest JSON); every layer above imports from here.
"""
