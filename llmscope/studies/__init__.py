"""Studies: a study file's cells, how they are recorded in the database, and how they run."""
