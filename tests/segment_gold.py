"""A small gold set of sentence boundaries in German and English (issue #47), for tests/test_documents.py.

Each entry is one text; `|` marks where a sentence starts (it is removed to give the text). It holds the
cases a rule-based segmenter gets wrong most: abbreviations (z. B., Dr., u. a., e.g., Mr.), numbers
(3.5, 1. Mai, 14.30 Uhr), quotes, ellipses, questions and exclamations, lines without final punctuation,
blank lines between paragraphs. Written for this project; not taken from a corpus.
"""

from __future__ import annotations

GOLD: dict[str, list[str]] = {
    "de": [
        "Der Zug fährt z. B. um 8 Uhr ab. |Bitte seien Sie pünktlich.",
        "Dr. Müller und Prof. Weber kommen morgen. |Sie bringen u. a. die Unterlagen mit.",
        "Am 1. Mai ist Feiertag. |Die Geschäfte bleiben geschlossen.",
        "Der Preis stieg um 3.5 Prozent. |Das ist mehr als erwartet.",
        "Er sagte: „Ich komme morgen.“ |Dann ging er nach Hause.",
        "Sie wartete und wartete... |Niemand kam.",
        "Das Treffen findet am 3. Oktober statt. |Wir sehen uns dort!",
        "Wie spät ist es? |Es ist schon nach zehn.",
        "Herr Dr. med. Schulz ist heute nicht da. |Bitte rufen Sie morgen an.",
        "Die Firma hat ca. 200 Mitarbeiter. |Sie wurde 1998 gegründet.",
        "Das kostet 12,50 Euro. |Möchten Sie bezahlen?",
        "Ein Mann fährt Fahrrad. |Zwei Kinder spielen im Park. |Eine Frau liest ein Buch.",
        "Wir treffen uns um 14.30 Uhr. |Bring bitte etwas zu essen mit.",
        "Das ist bzw. war sein Haus. |Jetzt wohnt er woanders.",
        "Die Ausstellung läuft bis zum 31. Dezember. |Der Eintritt ist frei.",
        "Er ist ein sog. Experte. |Niemand glaubt ihm.",
        "Was für ein Tag! |Endlich ist Wochenende.",
        "Sie las „Der Prozess“ von Kafka. |Es gefiel ihr sehr.",
        "Die Temperatur beträgt heute 25 °C. |Morgen wird es kälter.",
        "Überschrift ohne Punkt\n|Der erste Absatz beginnt hier. |Er hat zwei Sätze.\n\n|Der zweite Absatz.",
        "Einkaufsliste\n|Äpfel und Birnen\n|Brot vom Bäcker\n\n|Das war alles.",
        "Er kam um 9 Uhr an… |Zu spät.",
        "Das Verfahren (s. o.) ist bewährt. |Wir nutzen es weiter.",
        "Die Kinder spielen Fußball. |Ein Hund bellt laut. |Ihre Mutter ruft sie.",
        "„Kommst du mit?“, fragte sie. |Er nickte.",
        "Nr. 5 gewinnt den Preis. |Herzlichen Glückwunsch!",
        "Version 2.0 erscheint im Jan. 2025. |Sie bringt viele Neuerungen.",
        "Ein Hund rennt über die Wiese. |Zwei Männer sitzen auf einer Bank. |Es regnet.",
        "Die Sitzung beginnt um 10 Uhr. |Bitte bringen Sie Ihren Ausweis mit.\n|Danke!",
        "Sein Vater, Dipl.-Ing. Hans Meier, baut Brücken. |Er ist oft unterwegs.",
        # a sentence that starts with a digit, and abbreviations and ordinals before a number
        "Drei Leute sitzen vor einem Gebäude, das bemalt ist. |3 Jungen stehen auf einem Pier.",
        "Zwei Kinder spielen im Park. |2 Hunde rennen über die Wiese.",
        "Ein Mann fährt eine Kurve. |12 Leute sehen ihm zu.",
        "Siehe Abb. 3 für Details. |Das steht in Kap. 3 und Bd. 2.",
        "Er wohnt in Nr. 5 am Markt. |Das Haus ist ca. 3 Meter breit.",
        "Wir kommen am 3. Mai. |Der Text steht auf S. 12 oben.",
    ],
    "en": [
        "Mr. Smith went to Washington. |He arrived on Monday.",
        "Dr. Jones works at St. Mary's Hospital. |She is a surgeon.",
        "I like fruit, e.g. apples and pears. |What about you?",
        "The price rose by 3.5 percent. |That was unexpected.",
        'He said, "I will come tomorrow." |Then he left.',
        "She waited and waited... |Nobody came.",
        "The meeting is at 10 a.m. tomorrow. |Please be on time.",
        "Mrs. Brown and Ms. Green arrived late. |The show had started.",
        "The U.S. economy grew last year. |Unemployment fell.",
        "It costs $12.50. |Do you want it?",
        "A man rides a bike. |Two children play in the park. |A woman reads a book.",
        "Is this the right way? |I think so!",
        "The company was founded in 1998. |It has about 200 employees.",
        "See Fig. 3 for details. |The results are clear.",
        "He lives at No. 10 Downing Street. |It is famous.",
        "Title without a period\n|The first paragraph starts here. |It has two sentences.\n\n|Second paragraph.",
        '"Are you coming?" she asked. |He nodded.',
        "The file is called report.pdf and it is large. |Please compress it.",
        "Version 2.0 was released in Jan. 2020. |It added many features.",
        "Prof. Adams teaches at the university. |His course is popular.",
        "Wait… |What was that?",
        "The dog runs across the grass. |A bird flies over it.",
        "Visit www.example.com for more. |It is free.",
        "He scored 9.5 out of 10. |Impressive!",
        "Shopping list\n|apples and pears\n|bread from the baker\n\n|That is all.",
        "They met Mr. and Mrs. Lee at 5 p.m. on Friday. |It was fun.",
        "The results (see Sec. 4.2) are good. |We are pleased.",
        "A woman in a red coat walks her dog. |It is snowing.",
        "Two men are talking. |One of them laughs.\n|The other one does not.",
        "I.e. nothing changed. |We tried again.",
    ],
}

# Written after the segmenter's last change was tuned on GOLD (its one miss was "Dipl.-Ing."), before
# running it on these: what docs/serving.md reports as held out.
HELD_OUT: dict[str, list[str]] = {
    "de": [
        "Frau Dipl.-Kfm. Schmidt leitet das Büro. |Sie ist selten krank.",
        "Der Vortrag von Prof. Dr.-Ing. Weber war lang. |Alle waren müde.",
        "Die Lieferung kommt am 2. Juni. |Sie enthält u. a. Werkzeug.",
        "Das Angebot gilt bis 31.12.2024. |Danach steigt der Preis.",
        "Kommst du heute? |Oder erst morgen?",
        "„Halt!“, rief er. |Aber niemand hörte ihn.",
        "Der Wert liegt bei ca. 4,2 Mio. Euro. |Das ist viel Geld.",
        "Wir fahren mit der Linie 5 bis zum Hbf. |Dort steigen wir um.",
        "Er las das Buch in 2 Std. durch. |Es war spannend.",
        "Siehe dazu Abschnitt 4 unten. |Dort steht mehr.",
    ],
    "en": [
        "Gen. Patton led the army. |He was strict.",
        "The shop opens at 9 a.m. |Come early.",
        "She has a Ph.D. in physics. |Her thesis was on lasers.",
        "The temperature was 21.5 degrees. |It felt warm.",
        "He asked: 'Why not?' |Nobody answered.",
        "Buy milk, eggs, etc. at the store. |Then come home.",
        "Sen. Warren spoke first. |Then the vote began.",
        "Chapter 1\n|It was a dark and stormy night.",
        "The ship sailed at 6 p.m. on Tuesday. |It arrived on Friday.",
        "Really?! |I had no idea.",
    ],
}


# Written before the two fixes made against HELD_OUT's misses ("Dipl.-Kfm.", "Really?! I") were run on
# it; what docs/serving.md reports as the second held-out set.
HELD_OUT_2: dict[str, list[str]] = {
    "de": [
        "Die Kinder malen ein Bild. |Ihre Lehrerin schaut zu.",
        "Das Museum ist Mo. bis Fr. geöffnet. |Am Wochenende ist es zu.",
        "Warum nicht?! |Wir haben doch Zeit.",
        "Sie wohnt in der Goethestr. 12 in Berlin. |Er wohnt nebenan.",
        "Der Termin ist am 24.12. um 18 Uhr. |Bitte kommt alle.",
        "Ein Mädchen springt ins Wasser… |Die anderen lachen.",
        "Der Bericht (vgl. S. 14) ist kurz. |Er reicht aber aus.",
        "Zwei Hunde spielen im Schnee\n|Ein Mann sieht ihnen zu.",
        "„Wo bist du?“ |Niemand antwortete.",
        "Die Straße ist ca. 3 km lang. |Sie führt zum See.",
        "Herr Prof. Dr. Lange hält den Vortrag. |Danach gibt es Kaffee.",
        "Das Team gewann mit 3:1. |Die Fans jubelten.",
    ],
    "en": [
        "A boy is jumping into a pool. |His friends are watching.",
        "What?! |You can't be serious.",
        "The lab is run by Dr. Chen and Prof. Ruiz. |They work late.",
        "It happened on Jan. 5 at 3 p.m. |Nobody saw it.",
        "Pages 10-12 of vol. 3 are missing. |We must reorder it.",
        "The U.K. team won gold. |The crowd cheered.",
        "Two dogs are playing in the snow\n|A man watches them.",
        'He said "No way!" |Then he walked off.',
        "Ask Mr. T. Brown about it. |He knows everything.",
        "The score was 2.5 to 1.5. |It was close.",
        "Oh no... |The train has left.",
        "Is it done?? |Not yet.",
    ],
}


def parse(marked: str) -> tuple[str, list[int]]:
    """The text and the offsets where its sentences start (other than 0)."""
    parts = marked.split("|")
    text, starts, at = "", [], 0
    for i, p in enumerate(parts):
        if i:
            starts.append(at)
        text += p
        at += len(p)
    return text, starts
