"""The input columns the queries read (docs/queries.md "Inputs"), found by header name: the
client refuses a file without them before it uploads (client/input_check.py), and the query
service's rules read exactly these (spark/rules/contract.py). Every other column is uploaded
untouched. The oracle (oracle/reference.py) spells them again on purpose: it is the independent
reading of the contract the others are checked against."""

FLIGHT_COLUMNS = (
    "legId",
    "startingAirport",
    "destinationAirport",
    "travelDuration",
    "totalFare",
    "totalTravelDistance",
    "segmentsArrivalAirportCode",
)
AIRPORT_CODE, AIRPORT_LATITUDE, AIRPORT_LONGITUDE = "Airport Code", "Latitude", "Longitude"
AIRPORT_COLUMNS = (AIRPORT_CODE, AIRPORT_LATITUDE, AIRPORT_LONGITUDE)
