"""Arrow schemas of every artifact cpp-data writes, the shard generations v2..v6, the manifest, the tolerant
reader and the validator. Stages exchange data only through files with these schemas."""
