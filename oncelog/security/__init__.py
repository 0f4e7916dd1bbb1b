"""Listener security, authentication and authorization (issue 17): who is on a connection
(``principal.Session``), and whether they may do something (``authorizer.Authorizer``)."""
