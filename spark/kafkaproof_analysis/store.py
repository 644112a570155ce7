"""Files of the job through Hadoop's FileSystem API (`RunStore`): the manifest, ledger tables, Parquet output."""
from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .base import AnalysisInputError
from .schemas import REQUIRED_TABLES, SCHEMAS


def load_table(spark: SparkSession, store: "RunStore", run_dir: str, name: str) -> DataFrame:
    """Read ledger table `name`; missing optional tables read as empty."""
    path = f"{run_dir}/{name}.parquet"
    if store.exists(path):
        return spark.read.schema(SCHEMAS[name]).parquet(path)
    if name in REQUIRED_TABLES:
        raise AnalysisInputError(f"{path}: ledger table missing; the run is incomplete")
    return spark.createDataFrame([], SCHEMAS[name])


class RunStore:
    """Files of the job through Hadoop's FileSystem API (whatever scheme a location has).

    The driver never opens a run directory itself: on a cluster, or with `--deploy-mode cluster`,
    its own disk is not where the runs are.
    """

    def __init__(self, spark: SparkSession):
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, uri: str):
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        return path, path.getFileSystem(self._conf)

    def exists(self, uri: str) -> bool:
        path, fs = self._fs(uri)
        return bool(fs.exists(path))

    def read_text(self, uri: str) -> str:
        path, fs = self._fs(uri)
        stream = fs.open(path)
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()

    def write_text(self, uri: str, text: str) -> None:
        path, fs = self._fs(uri)
        out = fs.create(path, True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def delete(self, uri: str) -> None:
        path, fs = self._fs(uri)
        fs.delete(path, True)

    def replace(self, src: str, dst: str) -> None:
        """Publish directory `src` as `dst` (an older `dst` goes first)."""
        self.delete(dst)
        source, fs = self._fs(src)
        if not fs.rename(source, self._jvm.org.apache.hadoop.fs.Path(dst)):
            raise OSError(f"could not rename {src} to {dst}")

    def parquet_rows(self, run_dir: str) -> int:
        """Rows of the Parquet files (or directories of them) directly in `run_dir`, from their footers."""
        jvm = self._jvm
        _, fs = self._fs(run_dir)
        rows = 0
        for status in fs.globStatus(jvm.org.apache.hadoop.fs.Path(f"{run_dir}/*.parquet")) or []:
            files = ([status] if status.isFile() else
                     [f for f in fs.listStatus(status.getPath()) if f.isFile() and f.getPath().getName().endswith(".parquet")])
            for f in files:
                reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
                    jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromStatus(f, self._conf))
                try:
                    rows += reader.getRecordCount()
                finally:
                    reader.close()
        return rows


def read_manifest(store: RunStore, run_dir: str) -> dict[str, Any]:
    path = f"{run_dir}/manifest.json"
    if not store.exists(path):
        raise AnalysisInputError(f"{path}: no manifest; {run_dir} is not a kafkaproof run directory")
    return json.loads(store.read_text(path))


def write_parquet(df: DataFrame, path: str, files: int | None = 1, dictionary: bool = True) -> DataFrame:
    """Write `df` as Parquet and return it read back (with its schema: no inference job)."""
    writer = (df.coalesce(files) if files else df).write.mode("overwrite")
    if not dictionary:
        # Mostly unique columns: trying dictionaries first costs a third of the write.
        writer = writer.option("parquet.enable.dictionary", "false")
    writer.parquet(path)
    return df.sparkSession.read.schema(df.schema).parquet(path)
