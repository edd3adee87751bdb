"""Small input files in the layouts docs/queries.md describes, with their quirks, for the
client's input check."""

FLIGHTS_HEADER = (
    "legId,searchDate,flightDate,startingAirport,destinationAirport,fareBasisCode,"
    "travelDuration,elapsedDays,isBasicEconomy,isRefundable,isNonStop,baseFare,totalFare,"
    "seatsRemaining,totalTravelDistance,segmentsDepartureTimeEpochSeconds,"
    "segmentsDepartureTimeRaw,segmentsArrivalTimeEpochSeconds,segmentsArrivalTimeRaw,"
    "segmentsArrivalAirportCode,segmentsDepartureAirportCode,segmentsAirlineName,"
    "segmentsAirlineCode,segmentsEquipmentDescription,segmentsDurationInSeconds,"
    "segmentsDistance,segmentsCabinCode")
# Two rows of Kaggle's itineraries.csv; the second's equipment quoted with a comma in it.
FLIGHTS_ROWS = (
    "98685953630e772a098941b71906592b,2022-04-16,2022-04-17,ATL,BOS,LA0NX0MC,PT2H30M,0,False,"
    "False,True,217.67,248.60,4,947,1650191400,2022-04-17T06:30:00.000-04:00,1650200400,"
    "2022-04-17T09:00:00.000-04:00,BOS,ATL,Delta,DL,Airbus A321,9000,947,coach\n"
    "8622d132e890b398c0ad1d62b0232f54,2022-05-03,2022-06-24,CLT,LAX,MA0OA0MQ,PT8H10M,0,False,"
    "False,False,479.07,537.10,9,,1656073800||1656086520,2022-06-24T08:30:00.000-04:00||"
    "2022-06-24T12:02:00.000-04:00,1656078240||1656103200,2022-06-24T09:44:00.000-04:00||"
    "2022-06-24T13:40:00.000-07:00,ATL||LAX,CLT||ATL,Delta||Delta,DL||DL,"
    "\"Boeing 717, winglets||Airbus A321\",4440||16680,228||1943,coach||coach\n")
FLIGHTS_TEXT = FLIGHTS_HEADER + "\n" + FLIGHTS_ROWS
# The Opendatahub layout: a byte-order mark, `;` between fields, `\N` for null.
AIRPORTS_TEXT = (
    "\ufeffAirport Code;Airport Name;City Name;Country Name;Country Code;Latitude;Longitude;"
    "World Area Code;City Name geo_name_id;Country Name geo_name_id;coordinates\n"
    "YCB;Cambridge Bay;Cambridge Bay;Canada;CA;69.116667;-105.133333;906;\\N;6251999;"
    "69.116667, -105.133333\n"
    "ATL;Hartsfield-Jackson;Atlanta;United States;US;33.636719;-84.428067;\\N;\\N;6252001;"
    "33.636719, -84.428067\n")

