"""The memory service's HTTP and MCP application: routes, tools, access rules, responses."""
