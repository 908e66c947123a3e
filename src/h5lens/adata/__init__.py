"""What h5lens reads of AnnData and TreeData: eager, lazy, many files as one, whole rows for loaders."""
