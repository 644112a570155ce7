"""The Spark analysis (spark/analyze.py and its package spark/kafkaproof_analysis/), submitted with spark-submit:
settings, command line, results."""
from .submit import (ANALYSIS_DIR, DEFAULT_CONF, analyze, analyze_locations, analyze_many, application_path,
                     job_py_files, read_metrics, spark_conf, spark_env, spark_submit_argv)

__all__ = ["ANALYSIS_DIR", "DEFAULT_CONF", "analyze", "analyze_locations", "analyze_many", "application_path",
           "job_py_files", "read_metrics", "spark_conf", "spark_env", "spark_submit_argv"]
