"""The broker's storage: offset index → segment → partition log → log of every topic
(Kafka's split). See README.md in this folder for the layout and the server's contract."""
