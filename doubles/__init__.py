"""Stand-ins shared by the tests and the benchmarks: a scripted OpenAI-compatible LM (a real
HTTP server, for the LLM this machine cannot reach) and a small DSPy program repository."""
