# frozen_string_literal: true

module Bobbin
  # Text from the database or a job (a queue's name, an error's message) shown to people: on a page, in a metric's
  # label, on a terminal, in a log line. Whatever bytes an outside writer stored (SQLite keeps any; PostgreSQL in a
  # SQL_ASCII database too, handing them back as binary), it comes out as valid UTF-8, so one bad row cannot fail
  # the page, the scrape or the command that shows it.
  module Printable
    # Unicode's bidirectional marks, embedding, override and isolate controls (the "Trojan Source" set): invisible, and they
    # reorder the text after them, so an error reading `report\u202Efdp.exe` shows as "reportexe.pdf".
    BIDI_CONTROLS = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/
    # What a terminal or a log line shows escaped: control characters, the line and paragraph separators, and the bidi
    # controls.
    UNPRINTABLE = /\p{Cc}|[\u2028\u2029]|#{BIDI_CONTROLS}/

    module_function

    # `text` as valid UTF-8: a binary String's bytes read as UTF-8, bytes that are not UTF-8 replaced by U+FFFD.
    def utf8(text)
      text = text.to_s
      text = text.dup.force_encoding(Encoding::UTF_8) if text.encoding == Encoding::BINARY
      text = text.encode(Encoding::UTF_8, invalid: :replace, undef: :replace) unless text.encoding == Encoding::UTF_8
      text.valid_encoding? ? text : text.scrub
    end

    # For a terminal or a log line: utf8, and control characters shown escaped (`\e[2J`, `\u202E`), not obeyed — an
    # error raised with text from outside could otherwise clear the screen, retitle the window or reverse the text.
    def printable(text) = escaped(utf8(text), UNPRINTABLE)

    # For a page (which shows control characters as they are, harmless): utf8, and the bidi controls shown escaped.
    def displayable(text) = escaped(utf8(text), BIDI_CONTROLS)

    def escaped(text, pattern) = text.gsub(pattern) { |char| char.dump[1..-2] }
  end
end
