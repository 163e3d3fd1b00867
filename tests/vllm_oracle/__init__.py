"""The real ``vllm serve`` as the judge of cachetool's vLLM verdicts, and what it is started on: the tiny model and
its flags (:mod:`.tiny`), one server start on a cache root (:mod:`.server`) and the server commands unlike a warm's
(:mod:`.verdict_table`). The tests and the benchmarks import it (the benchmarks put the repository on sys.path);
it is no part of the installed package, which never starts a server to judge itself."""
