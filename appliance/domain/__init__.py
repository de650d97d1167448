"""Pure rules every layer above may use: protocols, client and inbound validation,
parsing. Nothing here touches the database, the network or a process.
"""
