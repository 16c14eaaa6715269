from kg.sql.parse import parse
for s in parse("EXPLAIN SELECT 'a;b' FROM 'k' AS OF REVISION 3; SHOW BRANCHES; RELATE FROM path='/a' IN WORKSPACE 'l' TO path='/b' IN WORKSPACE 'l' TYPE 'w' WEIGHT 0.5; CREATE BRANCH 'x' FROM 'main' AT REVISION 2; MERGE BRANCH 'x' INTO 'main'; UNRELATE FROM path=$1 TO path='/b'"):
    print(s)
for bad in ["SELECT (", "SELECT " + "("*100 + "1" + ")"*100, "RELATE FROM path='/a' TO", "CREATE TABLE x (a int)"]:
    try: print(parse(bad))
    except Exception as e: print(type(e).__name__, e, e.details)
