"""Process control: the command line, starting and stopping the service, the shared service."""
