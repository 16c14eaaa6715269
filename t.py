from kg.sql.dialect import DIALECT
print(repr(DIALECT.parse("SELECT path FROM k WHERE node_type IN ('a') AND properties->>'content' IS NOT NULL")[0].args['where']))
