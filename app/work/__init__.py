"""What a participant's task runs, described without a service, an ORM or Spark.

The registry checks a task against these rules when it is registered (``app.tasks``), the
federation loader checks a file with them, and the agents build the Spark side from the same
records (``spark_jobs.fragments``, ``spark_jobs.sources``, ``spark_jobs.sinks``):

- ``spec``: sources, SQL and Python fragments, sinks, stream schemas (Spark DDL);
- ``sql_check``: a SQL fragment parsed with the Spark dialect and checked against its inputs;
- ``distributions``: which Python distributions an agent runs fragments from;
- ``errors``: a bad field, named by its path inside the task.
"""
