"""The GPUs of a host: which ones this process may use (by UUID), and pinning a worker to one."""
