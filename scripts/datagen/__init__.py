"""The data generator (`python -m scripts.generate_data` is its command line), one module per
concept:

generate       generate(): the two files written, chunk by chunk; FLIGHTS_FILE, AIRPORTS_FILE

catalog        the market: airports, carriers, shares and rates read off the real samples
countries      country columns of the Opendatahub airports layout
network        airports with coordinates, time zones, distances and hub-choice tables
routing        routes, segment counts, connecting airports, carriers (per chunk)
schedule       departure/arrival instants, layovers, local offsets (per chunk)
fares          fares and seats (per chunk)
chunk          the numpy layout of one chunk of rows
itineraries    a whole chunk drawn, and repeated legIds
invalid        malformed rows, one validity rule broken each
csv_text       the text of itineraries.csv
airports_file  airports.csv
"""
