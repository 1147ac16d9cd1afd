"""The backend layer: the hook contract, one backend's manager, the registry of installed
backends and profiling wrappers; ``lowerkit.backend.cpu`` holds the CPU support that backend
plugins compose (nothing else in the core imports it)."""
