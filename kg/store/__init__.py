"""The SQL store: models, sessions, branch resolution, revisions, nodes and relations."""
